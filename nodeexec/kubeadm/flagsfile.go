package kubeadm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// KubeletArg is one kubelet flag, passed to the kubelet as --Name=Value:
// an entry of a KubeadmConfig's nodeRegistration.kubeletExtraArgs (Cluster
// API bootstrap/kubeadm/v1beta2 Arg; its nil Value is the empty string
// here, which kubeadm also writes as --name=).
type KubeletArg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// String returns the argument as the kubelet receives it: --name=value.
func (a KubeletArg) String() string { return "--" + a.Name + "=" + a.Value }

// KubeletArgsVariable is the variable kubeadm writes into kubeadm-flags.env
// and the kubelet's systemd drop-in expands in ExecStart.
const KubeletArgsVariable = "KUBELET_KUBEADM_ARGS"

// ErrUnsupportedFlagsFile is wrapped by ParseKubeadmFlags errors: the file
// is not in a form this package edits safely. The kubelet-args step refuses
// such a file the same way (and changes nothing).
var ErrUnsupportedFlagsFile = errors.New("kubeadm-flags.env not in a form this package edits")

// KubeadmFlags is kubeadm-flags.env as this package reads and writes it.
//
// kubeadm (`init` and `join`, and `upgrade` when it drops
// --container-runtime-endpoint for the NodeLocalCRISocket feature) writes
// the file as a single line
//
//	KUBELET_KUBEADM_ARGS="--name=value --name=value ..."
//
// with Go's %q quoting, from ArgumentsToCommand(own flags, kubeletExtraArgs):
// an extra arg replaces every own flag of the same name, and the result is
// sorted by name, then value. kubeadm's own flags are
// --container-runtime-endpoint (until NodeLocalCRISocket),
// --pod-infra-container-image, --register-with-taints (when taints are
// registered by flag) and --hostname-override (when the node name is not
// the hostname). The kubelet unit reads the file with EnvironmentFile= and
// passes $KUBELET_KUBEADM_ARGS in ExecStart, which systemd splits at
// whitespace and unquotes (quotes and backslashes are removed there).
//
// ParseKubeadmFlags accepts exactly what that chain passes through
// unchanged: the assignment as above with no quote or backslash inside the
// double quotes, every argument --name=value (name of ASCII letters,
// digits, '.', '_' and '-'), any other lines kept verbatim provided they
// are comments (not ending in a backslash, which systemd would join with
// the next line) or hold no quotes or backslashes (so no multi-line
// value can hide an assignment), and no control characters other than
// tab. Anything else is ErrUnsupportedFlagsFile.
type KubeadmFlags struct {
	pre, post []string // lines before and after the assignment, verbatim
	found     bool
	// Args are the arguments of KUBELET_KUBEADM_ARGS in file order.
	Args []KubeletArg
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("kubeadm: %w: %s", ErrUnsupportedFlagsFile, fmt.Sprintf(format, args...))
}

// flagNameInFile reports whether s is a flag name the file may carry.
// It is wider than the names a plan may set (ValidateKubeletArgName).
func flagNameInFile(s string) bool {
	if s == "" || !isAlnum(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ParseKubeadmFlags parses the content of kubeadm-flags.env (see
// KubeadmFlags for what it accepts). A file without the assignment parses
// to no arguments; String then appends one.
func ParseKubeadmFlags(content string) (KubeadmFlags, error) {
	var f KubeadmFlags
	for i := 0; i < len(content); i++ {
		if c := content[i]; (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f {
			return KubeadmFlags{}, unsupported("control character %q at byte %d", c, i)
		}
	}
	if content == "" {
		return f, nil
	}
	const prefix = KubeletArgsVariable + `="`
	for n, line := range strings.Split(strings.TrimSuffix(content, "\n"), "\n") {
		rest := strings.TrimLeft(line, " \t")
		switch {
		case strings.HasPrefix(rest, "#") || strings.HasPrefix(rest, ";"):
			if strings.HasSuffix(line, `\`) {
				return KubeadmFlags{}, unsupported("line %d: a comment ending in a backslash continues on the next line", n+1)
			}
		case strings.HasPrefix(line, prefix) && len(line) > len(prefix) && strings.HasSuffix(line, `"`):
			if f.found {
				return KubeadmFlags{}, unsupported("line %d: %s is assigned twice", n+1, KubeletArgsVariable)
			}
			body := line[len(prefix) : len(line)-1]
			if strings.ContainsAny(body, "\"'\\") {
				return KubeadmFlags{}, unsupported("line %d: quotes or backslashes inside %s", n+1, KubeletArgsVariable)
			}
			for _, tok := range strings.FieldsFunc(body, func(r rune) bool { return r == ' ' || r == '\t' }) {
				name, value, ok := strings.Cut(tok, "=")
				name, dashes := strings.CutPrefix(name, "--")
				if !ok || !dashes || !flagNameInFile(name) {
					return KubeadmFlags{}, unsupported("line %d: %q is not a --name=value argument", n+1, tok)
				}
				f.Args = append(f.Args, KubeletArg{Name: name, Value: value})
			}
			f.found = true
			continue
		case strings.Contains(line, KubeletArgsVariable):
			return KubeadmFlags{}, unsupported("line %d: %s is not assigned the way kubeadm writes it (%s\"--name=value ...\")", n+1, KubeletArgsVariable, KubeletArgsVariable+"=")
		case strings.ContainsAny(line, "\"'\\"):
			return KubeadmFlags{}, unsupported("line %d: quotes or backslashes outside %s", n+1, KubeletArgsVariable)
		}
		if f.found {
			f.post = append(f.post, line)
		} else {
			f.pre = append(f.pre, line)
		}
	}
	return f, nil
}

// RemoveAllExtraArgs, as a name to remove (KubeadmFlags.WithExtraArgs,
// KubeletArgsConfig.ReplaceAll), stands for every argument that is not
// one of kubeadm's own. No valid argument name can be "*".
const RemoveAllExtraArgs = "*"

// WithExtraArgs returns the file with every argument named in remove or
// in desired taken out, desired added, and the arguments sorted the way
// kubeadm sorts them (by name, then value): what `kubeadm join` writes
// when kubeletExtraArgs is desired, with the file's other arguments as
// kubeadm's own. Other lines are kept. RemoveAllExtraArgs in remove takes
// out every argument that is not one of kubeadm's own
// (KubeadmOwnedKubeletArgs).
func (f KubeadmFlags) WithExtraArgs(desired []KubeletArg, remove []string) KubeadmFlags {
	drop := map[string]bool{}
	for _, n := range remove {
		drop[n] = true
	}
	for _, a := range desired {
		drop[a.Name] = true
	}
	all := drop[RemoveAllExtraArgs]
	args := make([]KubeletArg, 0, len(f.Args)+len(desired))
	for _, a := range f.Args {
		if !drop[a.Name] && (!all || slices.Contains(KubeadmOwnedKubeletArgs(), a.Name)) {
			args = append(args, a)
		}
	}
	args = append(args, desired...)
	slices.SortStableFunc(args, func(a, b KubeletArg) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	f.Args = args
	f.found = true
	f.pre, f.post = slices.Clone(f.pre), slices.Clone(f.post)
	return f
}

// String returns the file content: the other lines as read, the
// assignment in place (appended when the file had none), one newline
// after each line.
func (f KubeadmFlags) String() string {
	var b strings.Builder
	for _, l := range f.pre {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if f.found {
		b.WriteString(KubeletArgsVariable + `="`)
		for i, a := range f.Args {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(a.String())
		}
		b.WriteString("\"\n")
	}
	for _, l := range f.post {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// kubeletArgsRecordHeader starts the record file the kubelet-args step
// keeps next to kubeadm-flags.env.
const kubeletArgsRecordHeader = "# upgradekit: kubelet extra args applied to kubeadm-flags.env, one --name=value per line; do not edit\n"

// FormatKubeletArgsRecord returns the content of the record file the
// kubelet-args step writes: a comment line, then one --name=value line per
// argument it applied. The next plan reads it to remove what this one
// added.
func FormatKubeletArgsRecord(args []KubeletArg) string {
	var b strings.Builder
	b.WriteString(kubeletArgsRecordHeader)
	for _, a := range args {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseKubeletArgsRecord returns the names in a record file written by
// FormatKubeletArgsRecord (blank and # lines are skipped). Any other line
// is ErrUnsupportedFlagsFile: the step does not guess what a foreign file
// meant.
func ParseKubeletArgsRecord(content string) ([]string, error) {
	var names []string
	for n, line := range strings.Split(content, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, ok := strings.Cut(line, "=")
		name, dashes := strings.CutPrefix(name, "--")
		if !ok || !dashes || !flagNameInFile(name) {
			return nil, unsupported("record line %d: %s is not a --name=value line", n+1, errtext.Quote(line))
		}
		names = append(names, name)
	}
	return names, nil
}

// Limits of a kubelet argument, Cluster API's for kubeletExtraArgs.
const (
	MaxKubeletArgNameLength  = 256
	MaxKubeletArgValueLength = 1024
)

// ValidateKubeletArgName checks a flag name a plan may set: lowercase
// ASCII letters, digits and dashes, starting with a letter or digit (no
// leading dashes: the plan adds them), at most MaxKubeletArgNameLength.
//
// The error matches ErrInvalidKubeletArg.
func ValidateKubeletArgName(name string) error {
	if err := checkKubeletArgName(name); err != nil {
		return fmt.Errorf("kubeadm: %w: %v", ErrInvalidKubeletArg, err)
	}
	return nil
}

func checkKubeletArgName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > MaxKubeletArgNameLength:
		return fmt.Errorf("name longer than %d bytes", MaxKubeletArgNameLength)
	case name[0] == '-':
		return errors.New("name starts with a dash (give it without the leading --)")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("name has %q (want ^[a-z0-9][a-z0-9-]*$)", c)
		}
	}
	return nil
}

// ValidateKubeletArgValue checks that a value reaches the kubelet exactly
// as given through kubeadm-flags.env and systemd: valid UTF-8 of printable
// characters, at most MaxKubeletArgValueLength bytes, and no whitespace,
// quote or backslash. systemd splits $KUBELET_KUBEADM_ARGS at whitespace
// and removes quotes and backslashes while doing so, so such a value
// would reach the kubelet as something else (several arguments, or
// without its quotes); it is refused rather than written.
// Shell metacharacters ($, `, ;, |, &, *, ...) are fine: no shell ever
// parses the value.
//
// The error matches ErrInvalidKubeletArg.
func ValidateKubeletArgValue(value string) error {
	if err := checkKubeletArgValue(value); err != nil {
		return fmt.Errorf("kubeadm: %w: %v", ErrInvalidKubeletArg, err)
	}
	return nil
}

func checkKubeletArgValue(value string) error {
	if len(value) > MaxKubeletArgValueLength {
		return fmt.Errorf("value longer than %d bytes", MaxKubeletArgValueLength)
	}
	if !utf8.ValidString(value) {
		return errors.New("value is not valid UTF-8")
	}
	for i, r := range value {
		switch {
		case unicode.IsSpace(r):
			return fmt.Errorf("value has whitespace %q at byte %d: systemd splits $%s at whitespace, so the kubelet would get several arguments", r, i, KubeletArgsVariable)
		case r == '"' || r == '\'' || r == '\\':
			return fmt.Errorf("value has %q at byte %d: systemd removes quotes and backslashes when it splits $%s", r, i, KubeletArgsVariable)
		case !unicode.IsPrint(r):
			return fmt.Errorf("value has the non-printable character %U at byte %d", r, i)
		}
	}
	return nil
}
