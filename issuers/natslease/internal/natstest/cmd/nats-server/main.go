// Command nats-server builds the nats-server binary the natslease tests run
// into the user's cache folder, unless it is there, and prints its path.
package main

import (
	"fmt"
	"os"

	"github.com/zukhruf/lease/issuers/natslease/internal/natstest/natsbin"
)

func main() {
	path, err := natsbin.Ensure(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(path)
}
