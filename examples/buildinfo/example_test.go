package buildinfo_test

import (
	"fmt"
	"strings"

	"github.com/upgradekit/upgradekit/examples/buildinfo"
)

// A command's -version flag prints this line.
func ExampleVersion() {
	v := buildinfo.Version("mycommand")
	fmt.Println(strings.HasPrefix(v, "mycommand "), strings.Contains(v, " go1."))
	// Output: true true
}
