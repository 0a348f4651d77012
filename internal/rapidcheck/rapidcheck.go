// Package rapidcheck sets how many cases the rapid property tests of this
// module check in a plain go test run.
package rapidcheck

import (
	"flag"
	"fmt"
	"os"
)

// Raise sets rapid's number of checks to n unless the command line
// (-rapid.checks) or the environment (RAPID_CHECKS) chose one. A TestMain
// calls it after flag.Parse, in a test binary that imports
// pgregory.net/rapid; it panics when rapid's flag is not there.
func Raise(n int) {
	if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if set {
		return
	}
	if err := flag.Set("rapid.checks", fmt.Sprint(n)); err != nil {
		panic("rapidcheck: " + err.Error())
	}
}
