// Package buildinfo gives the commands under examples/ their --version
// line: the program name, the main module's path and version, the VCS
// revision the binary was built from (with "+modified" when the tree had
// uncommitted changes) and the Go version, read from the binary's own
// build information (runtime/debug.ReadBuildInfo).
//
// The revision is there only when the go command recorded it: a build
// from a git clone with -buildvcs left on (the default). A build from a
// module zip (go install MOD@VERSION) has the module version instead, and
// a build in a container from copied sources (the examples' Dockerfiles)
// neither.
//
// It is a helper of the example programs, public so that they use only
// public packages; it is not part of the library's API promise.
package buildinfo
