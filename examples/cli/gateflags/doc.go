// Package gateflags holds the in-place extension's gate flags, shared by
// examples/inplace-extension, whose UpdateMachine asks the gates, and the
// preview, which in process asks the same gates what they would answer
// now, so that both spell, check and build them alike.
package gateflags
