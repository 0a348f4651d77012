// Package layout names the locks of a lock-set run and deals them to its
// contender processes.
package layout

import (
	"fmt"
	"strconv"
)

// Name returns the name of lock l of n on side: a letter after the side
// while n is at most 26 ("lease-c"), a number of n's width beyond
// ("lease-017").
func Name(side string, l, n int) string {
	if n <= 26 {
		return fmt.Sprintf("%s-%c", side, 'a'+l)
	}
	return fmt.Sprintf("%s-%0*d", side, len(strconv.Itoa(n-1)), l)
}

// Processes returns, for each contender process of side, the locks it
// contends for: locks locks in groups of perProcess, each group contended
// by clients processes. With perProcess 1 each process has one lock, in
// the order of the locks, its clients one after another. locks must be a
// multiple of perProcess.
func Processes(side string, locks, perProcess, clients int) ([][]string, error) {
	if locks < 1 || perProcess < 1 || clients < 1 {
		return nil, fmt.Errorf("layout: %d locks, %d a process, %d clients a lock: each must be at least 1", locks, perProcess, clients)
	}
	if locks%perProcess != 0 {
		return nil, fmt.Errorf("layout: %d locks are not a multiple of %d locks a process", locks, perProcess)
	}
	var procs [][]string
	for g := 0; g < locks; g += perProcess {
		group := make([]string, perProcess)
		for i := range group {
			group[i] = Name(side, g+i, locks)
		}
		for range clients {
			procs = append(procs, group)
		}
	}
	return procs, nil
}
