// Command lockset-sentinel runs a redistest Group (a primary, two replicas
// and three Sentinels) for the lock-set harness in internal/lockset, which
// cannot import this module's internal packages. Its servers live in
// folders under -dir.
//
// Once the group is ready it prints one line of JSON, the group's
// addresses:
//
//	{"master": NAME, "sentinels": [ADDR, ...], "servers": [PRIMARY, REPLICA, ...]}
//
// and then runs the faults its standard input asks for, one a line, and
// answers each with a line, "ok" or "error: WHY":
//
//	pause ADDR    stops the server at ADDR (SIGSTOP)
//	resume ADDR   lets it go on (SIGCONT)
//	kill ADDR     kills it (SIGKILL) and waits for it to exit
//	start ADDR    starts it again on its port and flags: empty, since the
//	              group's servers keep no data
//	cut ADDR      makes the replication link of the replica at ADDR
//	              silent both ways (while the replica still follows the
//	              first primary through it)
//	heal ADDR     heals that link, and resets its connections
//
// It stops the group and exits when its standard input ends.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/zukhruf/lease/docs/examples/redislease/internal/redistest"
	"github.com/zukhruf/lease/internal/faultnet"
)

// addrs is the first line this command prints; internal/lockset reads the
// same fields.
type addrs struct {
	Master    string   `json:"master"`
	Sentinels []string `json:"sentinels"`
	Servers   []string `json:"servers"`
}

func main() {
	log.SetFlags(0)
	dir := flag.String("dir", "", "the folder the servers' folders are made in")
	flag.Parse()
	if *dir == "" {
		log.Fatal("lockset-sentinel: -dir is required")
	}
	g, err := redistest.NewGroup(*dir, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	a := addrs{Master: redistest.GroupName, Sentinels: g.SentinelAddrs(), Servers: []string{g.Primary.Addr()}}
	for _, r := range g.Replicas {
		a.Servers = append(a.Servers, r.Addr())
	}
	b, _ := json.Marshal(a)
	fmt.Printf("%s\n", b)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if err := fault(g, sc.Text()); err != nil {
			fmt.Printf("error: %v\n", err)
			continue
		}
		fmt.Println("ok")
	}
}

// fault runs one line of the standard input.
func fault(g *redistest.Group, line string) error {
	op, addr, _ := strings.Cut(line, " ")
	s := g.Server(addr)
	if s == nil {
		return fmt.Errorf("no server %q in the group", addr)
	}
	switch op {
	case "pause":
		return s.Pause()
	case "resume":
		return s.Resume()
	case "kill":
		s.Kill()
		return nil
	case "start":
		return s.Start()
	case "cut", "heal":
		link := linkOf(g, s)
		if link == nil {
			return fmt.Errorf("%s has no replication link: it is no replica of the group's start", addr)
		}
		if op == "cut" {
			link.Drop(faultnet.Both)
		} else {
			link.Heal()
			link.Cut()
		}
		return nil
	}
	return fmt.Errorf("no fault %q (pause, resume, kill, start, cut, heal)", op)
}

// linkOf returns the replication link of s, a replica of the group's start.
func linkOf(g *redistest.Group, s *redistest.Server) *faultnet.Proxy {
	for i, r := range g.Replicas {
		if r == s {
			return g.Links[i]
		}
	}
	return nil
}
