// Command bench-many holds many leases of one process on one redis-server
// it starts (redistest, the default maxclients), for each count of -n:
// redislease's, then redsync's Mutex extended every third of its expiry,
// on the same server in the same run. It prints a markdown table: the
// time to grant all, the server's connections and commands a second while
// holding, the goroutines and heap per lease of the process, and the false
// losses. make bench-many-redis runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/zukhruf/lease/issuers/redislease/internal/manyleases"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

func main() {
	log.SetFlags(0)
	counts := flag.String("n", "1000,10000,100000", "the counts of leases held at once, comma-separated")
	hold := flag.Duration("hold", 60*time.Second, "how long the leases are held once all are granted")
	ttl := flag.Duration("ttl", 10*time.Second, "the TTL of the lease (its default Config's) and redsync's expiry")
	peer := flag.Bool("peer", true, "measure redsync's Mutex beside")
	flag.Parse()
	dir, err := os.MkdirTemp("", "bench-many")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.NewServer(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Kill()
	ctx := context.Background()
	var rows, dels []string
	for run, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("bench-many: -n: %v", err)
		}
		c := manyleases.Config{Addr: srv.Addr(), N: n, Hold: *hold, TTL: *ttl, Prefix: fmt.Sprintf("many-%d-", run)}
		log.Printf("bench-many: %d leases of redislease, held %v", n, *hold)
		r, err := manyleases.Lease(ctx, c)
		if err != nil {
			log.Fatalf("bench-many: redislease, %d leases: %v", n, err)
		}
		rows = append(rows, r.Row())
		log.Print(r.Row())
		if r.FirstLoss != "" {
			log.Printf("bench-many: a false loss: %s", r.FirstLoss)
		}
		dels = append(dels, fmt.Sprintf("%d leases: the deleted key's lease lost %s after the DEL returned, %d others lost in the second after", n, r.DelLoss.Round(10*time.Microsecond), r.DelOthers))
		log.Print(dels[len(dels)-1])
		if *peer {
			c.Prefix = fmt.Sprintf("many-redsync-%d-", run)
			log.Printf("bench-many: %d of redsync's Mutex, held %v", n, *hold)
			r, err := manyleases.Redsync(ctx, c)
			if err != nil {
				log.Fatalf("bench-many: redsync, %d mutexes: %v", n, err)
			}
			rows = append(rows, r.Row())
			log.Print(r.Row())
		}
	}
	fmt.Printf("Held %v each, TTL %v (the lease's Config and redsync's expiry, extended every third of it), one redis-server with its default maxclients; %d cores, %s/%s, %s, %s.\n\n",
		*hold, *ttl, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	fmt.Println(manyleases.Header)
	for _, r := range rows {
		fmt.Println(r)
	}
	fmt.Println()
	fmt.Println("An operator's DEL of one key after the hold:")
	fmt.Println()
	for _, d := range dels {
		fmt.Println("- " + d)
	}
}
