package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// ErrHelp is what [Parse] returns for -h or --help: print the help and
// exit 0.
var ErrHelp = pflag.ErrHelp

// UsageError is a command line that cannot run (an unknown flag, a bad
// value, missing or extra arguments); the commands exit 2 on it.
type UsageError struct {
	Err error
}

// Error is the message of the error wrapped.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the error wrapped, for errors.Is and errors.As.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a [UsageError] with a message formatted as fmt.Errorf
// formats it (%w wraps).
func Usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// NewFlagSet returns a flag set that prints nothing itself (errors come
// back from [Parse]; help is printed with [WriteHelp]) and lists its flags
// in the order they were defined.
func NewFlagSet(command string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(command, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// Parse parses args as kubectl parses a command line, plus the one-dash
// long flags of [Normalize]. It returns [ErrHelp] for -h or --help and a
// [UsageError] for anything else it refuses.
func Parse(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(Normalize(fs, args))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pflag.ErrHelp):
		return ErrHelp
	}
	return &UsageError{Err: err}
}

// Normalize rewrites the long flags of fs written with one dash (-cluster,
// -o=json is left alone) to their two-dash form, so that command lines
// written for Go's flag package keep their meaning under pflag. An
// argument is rewritten only where pflag would read a flag: not after
// "--" and not where it is the value of the flag before it. A one-dash
// word that is neither a long flag nor starts with a shorthand of fs is
// rewritten too, so that pflag reports it as "unknown flag: --word"
// rather than as an unknown shorthand.
func Normalize(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case len(a) < 2 || a[0] != '-':
			out = append(out, a)
			continue
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			out = append(out, a)
			if f := fs.Lookup(name); f != nil && f.NoOptDefVal == "" && !hasValue && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
			continue
		}
		body := a[1:]
		name, _, hasValue := strings.Cut(body, "=")
		if len(name) > 1 {
			f := fs.Lookup(name)
			if f != nil || name == "help" || (fs.ShorthandLookup(name[:1]) == nil && name[0] != 'h') {
				out = append(out, "-"+a)
				if f != nil && f.NoOptDefVal == "" && !hasValue && i+1 < len(args) {
					out = append(out, args[i+1])
					i++
				}
				continue
			}
		}
		// Shorthands: -n NS, -ojson, -o=json; the last one of a group
		// may take the next argument as its value.
		out = append(out, a)
		for j := 0; j < len(body); j++ {
			f := fs.ShorthandLookup(body[j : j+1])
			if f == nil || body[j] == '=' {
				break
			}
			if f.NoOptDefVal == "" {
				if j == len(body)-1 && i+1 < len(args) {
					out = append(out, args[i+1])
					i++
				}
				break
			}
		}
	}
	return out
}

// WriteHelp writes a command's help: its synopsis lines, then its flags as
// pflag lists them (--name, -n, --name string).
func WriteHelp(w io.Writer, fs *pflag.FlagSet, synopsis ...string) {
	for _, s := range synopsis {
		fmt.Fprintln(w, s)
	}
	fmt.Fprintln(w, "\nFlags:")
	fmt.Fprint(w, fs.FlagUsages())
	fmt.Fprintln(w, "  -h, --help   print this help")
}

// PrintUsageError prints err, a command line that cannot run, as kubectl
// does: one line naming the command, then where to read more.
//
//	kubectl upgradekit preview: unknown flag: --clustr
//	See 'kubectl upgradekit preview --help' for usage.
func PrintUsageError(w io.Writer, command string, err error) {
	fmt.Fprintf(w, "%s: %v\nSee '%s --help' for usage.\n", command, err, command)
}
