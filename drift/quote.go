package drift

import (
	"fmt"
	"strconv"
)

// maxQuoted is how many bytes of a caller's value an error message quotes.
const maxQuoted = 128

// quote is strconv.Quote(s), cut at maxQuoted bytes with the length
// given, so that a huge input does not come back as a huge error. (A copy
// of internal/errtext.Quote: this leaf package imports nothing of ours.)
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:maxQuoted]), len(s))
}
