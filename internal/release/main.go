// Command release checks that every published module of the repository is
// installable from its tag and keeps its API, and prepares a release:
//
//	go run . [-root DIR] install-check
//	go run . [-root DIR] apicheck [-update]
//	go run . [-root DIR] release VERSION
//
// The Makefile's install-check, apicheck, apicheck-update and release
// targets run it; docs/releasing.md says what each does.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	root := flag.String("root", "../..", "the repository's root")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: release [-root DIR] install-check | apicheck [-update] | release VERSION")
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	switch args := flag.Args(); {
	case len(args) == 1 && args[0] == "install-check":
		err = installCheck(*root)
	case len(args) == 1 && args[0] == "apicheck":
		err = apiCheck(*root, false)
	case len(args) == 2 && args[0] == "apicheck" && args[1] == "-update":
		err = apiCheck(*root, true)
	case len(args) == 2 && args[0] == "release":
		err = release(*root, args[1])
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
