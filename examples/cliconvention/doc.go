// Package cliconvention holds no code: its test builds every example
// binary and checks the command-line convention they share
// (examples/README.md): -h exits 0, a usage error exits 2 and is printed
// once, each finding has its own non-zero exit, names a flag refers to
// are validated, and --help and usage errors spell the command's long
// flags --flag, as kubectl does.
package cliconvention
