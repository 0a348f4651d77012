// Command versitygw builds the versitygw binary of the s3lease and s3fence
// tests into the user's cache folder if it is not there yet, and prints its
// path; make s3-versitygw runs it. See package s3test.
package main

import (
	"fmt"
	"log"
	"os"

	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

func main() {
	log.SetFlags(0)
	path, err := s3test.Ensure(func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(path)
}
