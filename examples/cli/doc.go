// Package cli gives the commands under examples/ the command line kubectl
// users expect: POSIX/GNU flags parsed by spf13/pflag (--output=json,
// -ojson, -n NS, flags after arguments), a usage error printed as one line
// and a hint to --help, -o json|yaml printed as a Kubernetes-shaped object
// (apiVersion and kind on top, camelCase keys, durations as strings, no
// nulls), and progress on a terminal only.
//
// Long flags written with one dash (-cluster demo, -version), which the
// examples accepted before they moved to pflag and which their deploy
// manifests and scripts still use, keep working: [Parse] reads a single
// dash followed by the full name of a long flag as that long flag. Help
// and documentation use the kubectl spelling, --cluster.
//
// It is a helper of the example programs, public so that they use only
// public packages; it is not part of the library's API promise.
package cli
