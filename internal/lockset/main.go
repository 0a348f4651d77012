// Command lockset runs the lock-set workload against an issuer of this
// repository and its peer library, under a random schedule of faults, and
// checks the history it records (Jepsen's lock-set: acquire, read the
// guarded register, sleep, write it back with the token, release or lose).
//
//	lockset run -issuer etcd -seconds 600 -seed 7 [-mix all] [-out DIR]
//	lockset all -seconds 600 -seeds 10 [-doc FILE]
//	lockset check -history DIR/history.jsonl
//	lockset cycle [-coordinators redis,etcd,pg,mysql,k8s] [-doc FILE]
//
// run prints the folder of the run, which holds history.jsonl, summary.json
// and, for every lock with a violation, porcupine's view of it. check
// prints the counts of each side and exits 1 on a violation. cycle measures
// the lock cycle of each issuer beside its peers (package lockcycle). The other
// subcommands (client, server) are the processes run starts.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "run":
		err = runMain(args)
	case "all":
		err = allMain(args)
	case "check":
		err = checkMain(args)
	case "cycle":
		err = cycleMain(args)
	case "client":
		err = clientMain(args)
	case "server":
		err = serverMain(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockset:", err)
		if err == errViolation {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: lockset run -issuer NAME -seconds N -seed N [-mix MIX] [-out DIR] | lockset all -seconds N -seeds N [-doc FILE] | lockset check -history FILE | lockset cycle [-coordinators LIST] [-doc FILE]")
	os.Exit(2)
}
