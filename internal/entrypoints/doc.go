// Package entrypoints holds no code: its tests call every exported
// function and method of upgradekit's library packages with nil, zero,
// huge, cyclic and hostile arguments, and fail on a panic, a call that
// does not return, or an error that is not one of ours (a sentinel
// errors.Is can match, or a typed error errors.As can find).
//
// The list of entry points is generated from the packages' sources
// (zz_registry_test.go); TestRegistryIsComplete fails when an exported
// function is neither in it nor excluded with a reason, and rewrites it
// with
//
//	go test ./internal/entrypoints -run TestRegistryIsComplete -update
//
// FuzzEntryPoints is the same check driven by the fuzzer (make
// fuzz-smoke runs it with the others).
package entrypoints
