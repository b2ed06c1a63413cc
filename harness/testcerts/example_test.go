package testcerts_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/upgradekit/upgradekit/harness/testcerts"
)

// Write fills a directory with what a TLS server on 127.0.0.1 needs, and
// the CA its clients trust.
func ExampleWriteFiles() {
	dir, err := os.MkdirTemp("", "certs")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	pool, err := testcerts.WriteFiles(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	sort.Strings(names)
	for _, n := range names {
		fmt.Println(filepath.Base(n))
	}
	fmt.Println("pool trusts the CA:", pool != nil)
	// Output:
	// ca.crt
	// tls.crt
	// tls.key
	// pool trusts the CA: true
}
