// Command lockset-redis runs a redistest Group (-kind sentinel: a primary,
// two replicas and three Sentinels) or Cluster (-kind cluster: three
// primaries, each with a replica) for the lock-set harness in
// internal/lockset, which cannot import this module's internal packages.
// Its servers live in folders under -dir.
//
// Once the servers are ready it prints one line of JSON, their addresses
// (a Cluster has no Sentinels, and no master name):
//
//	{"master": NAME, "sentinels": [ADDR, ...], "servers": [ADDR, ...]}
//
// and then runs the faults its standard input asks for, one a line, and
// answers each with a line, "ok" or "error: WHY":
//
//	pause ADDR    stops the server at ADDR (SIGSTOP)
//	resume ADDR   lets it go on (SIGCONT)
//	kill ADDR     kills it (SIGKILL) and waits for it to exit
//	start ADDR    starts it again on its port and flags: empty, since the
//	              servers keep no data (a Cluster node keeps its identity,
//	              in its nodes.conf)
//	cut ADDR      makes the replication link of the Group's replica at
//	              ADDR silent both ways (while the replica still follows
//	              the first primary through it)
//	heal ADDR     heals that link, and resets its connections
//
// It stops the servers and exits when its standard input ends.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

// addrs is the first line this command prints; internal/lockset reads the
// same fields.
type addrs struct {
	Master    string   `json:"master,omitempty"`
	Sentinels []string `json:"sentinels,omitempty"`
	Servers   []string `json:"servers"`
}

// servers is what the faults need of a Group or a Cluster.
type servers struct {
	server func(addr string) *redistest.Server
	link   func(s *redistest.Server) *faultnet.Proxy // nil for a Cluster
}

func main() {
	log.SetFlags(0)
	dir := flag.String("dir", "", "the folder the servers' folders are made in")
	kind := flag.String("kind", "sentinel", "sentinel (a Group) or cluster")
	flag.Parse()
	if *dir == "" {
		log.Fatal("lockset-redis: -dir is required")
	}
	var (
		a  addrs
		sv servers
	)
	switch *kind {
	case "sentinel":
		g, err := redistest.NewGroup(*dir, 2)
		if err != nil {
			log.Fatal(err)
		}
		defer g.Close()
		a = addrs{Master: redistest.GroupName, Sentinels: g.SentinelAddrs(), Servers: []string{g.Primary.Addr()}}
		for _, r := range g.Replicas {
			a.Servers = append(a.Servers, r.Addr())
		}
		sv = servers{server: g.Server, link: func(s *redistest.Server) *faultnet.Proxy {
			for i, r := range g.Replicas {
				if r == s {
					return g.Links[i]
				}
			}
			return nil
		}}
	case "cluster":
		c, err := redistest.NewCluster(*dir)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		a = addrs{Servers: c.Addrs()}
		sv = servers{server: c.Node, link: func(*redistest.Server) *faultnet.Proxy { return nil }}
	default:
		log.Fatalf("lockset-redis: no -kind %q (sentinel, cluster)", *kind)
	}
	b, _ := json.Marshal(a)
	fmt.Printf("%s\n", b)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if err := sv.fault(sc.Text()); err != nil {
			fmt.Printf("error: %v\n", err)
			continue
		}
		fmt.Println("ok")
	}
}

// fault runs one line of the standard input.
func (sv servers) fault(line string) error {
	op, addr, _ := strings.Cut(line, " ")
	s := sv.server(addr)
	if s == nil {
		return fmt.Errorf("no server %q", addr)
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
		link := sv.link(s)
		if link == nil {
			return fmt.Errorf("%s has no replication link: it is no replica of the Group's start", addr)
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
