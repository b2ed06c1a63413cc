package gateflags_test

import (
	"fmt"

	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/examples/cli/gateflags"
)

// A command registers the gate flags, checks them once parsed, and builds
// the gates (here without a management cluster: the window alone).
func Example() {
	var f gateflags.Flags
	fs := cli.NewFlagSet("inplace-extension")
	f.Add(fs)
	if err := fs.Parse([]string{"--maintenance-window", "0 2 * * *", "--maintenance-timezone", "Europe/Berlin"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := f.Check(); err != nil {
		fmt.Println(err)
		return
	}
	gates, _ := f.Gates(nil)
	fmt.Println(f.Set(), len(gates))
	fs2 := cli.NewFlagSet("preview")
	var bad gateflags.Flags
	bad.Add(fs2)
	_ = fs2.Parse([]string{"--soak=-5m"})
	fmt.Println(bad.Check())
	// Output:
	// true 1
	// --soak -5m0s: must not be negative
}
