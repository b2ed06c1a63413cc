package cli_test

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/upgradekit/upgradekit/examples/cli"
)

// A command's flags, parsed as kubectl parses them (the one-dash -cluster
// as the examples always took it), a usage error, and a result printed
// with -o yaml.
func Example() {
	var cluster, output string
	fs := cli.NewFlagSet("demo")
	fs.StringVar(&cluster, "cluster", "", "name of the Cluster")
	cli.OutputFlag(fs, &output, cli.Table, cli.JSON, cli.YAML)

	if err := cli.Parse(fs, []string{"extra", "-cluster", "demo", "-oyaml"}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(cluster, output, fs.Args())

	err := cli.Parse(fs, []string{"--clustr", "demo"})
	var ue *cli.UsageError
	if errors.As(err, &ue) {
		cli.PrintUsageError(os.Stdout, "demo", err)
	}

	type result struct {
		Machines []string      `json:"machines"`
		Took     time.Duration `json:"took"`
	}
	if err := cli.WriteObject(os.Stdout, output, "Result", result{Took: 8 * time.Minute}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// demo yaml [extra]
	// demo: unknown flag: --clustr
	// See 'demo --help' for usage.
	// apiVersion: cli.upgradekit.io/v1alpha1
	// kind: Result
	// machines: []
	// took: 8m0s
}
