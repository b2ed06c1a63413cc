package drift

// Names the tests of package drift_test reach that are not exported.
var (
	ErrUnsupportedType  = errUnsupportedType
	ErrUnsupportedValue = errUnsupportedValue
	ErrCycle            = errCycle
	ErrTooDeep          = errTooDeep
	ParseHash           = parseHash
	ParseFingerprints   = parseFingerprints
	HashSuffix          = hashSuffix
	VersionSuffix       = versionSuffix
	FieldsSuffix        = fieldsSuffix
)

const (
	MaxDepth                    = maxDepth
	MaxVersionLen               = maxVersionLen
	DefaultMaxFingerprintFields = defaultMaxFingerprintFields
)

// ReflectionWalk makes a Hasher walk values through reflection only, as
// the oracle for the memory walk.
func ReflectionWalk() Option {
	return optionFunc(func(c *config) error {
		c.noMemWalk = true
		return nil
	})
}
