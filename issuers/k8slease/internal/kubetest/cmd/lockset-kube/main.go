// Command lockset-kube runs a kubetest server (etcd in this process,
// kube-apiserver a child of it) for the lock-set harness in
// internal/lockset, which cannot import this module's internal packages.
// It writes the clients' configuration (the apiserver's address, its CA
// and a bearer token) as JSON to -config, prints "endpoint ADDR", and
// serves until SIGTERM. SIGUSR1 kills the apiserver, as a crash does, and
// SIGUSR2 starts it again on the same port and storage; a SIGSTOP of this
// process's group stops etcd and the apiserver alike.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	ossignal "os/signal"
	"syscall"

	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

// clientConfig is what a client needs of the server; internal/lockset
// reads the same fields.
type clientConfig struct {
	Addr  string `json:"addr"`
	CA    []byte `json:"ca"`
	Token string `json:"token"`
}

func main() {
	log.SetFlags(0)
	config := flag.String("config", "", "the file to write the clients' configuration to")
	flag.Parse()
	if *config == "" {
		log.Fatal("lockset-kube: -config is required")
	}
	s, stop, err := kubetest.StartShared()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	cfg := s.Config()
	b, _ := json.Marshal(clientConfig{Addr: s.Addr(), CA: cfg.CAData, Token: cfg.BearerToken})
	if err := os.WriteFile(*config, b, 0o600); err != nil {
		log.Print(err)
		return
	}
	sigs := make(chan os.Signal, 4)
	ossignal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	fmt.Printf("endpoint %s\n", s.Addr())
	for sig := range sigs {
		switch sig {
		case syscall.SIGUSR1:
			if err := s.StopAPIServer(); err != nil {
				log.Print(err)
			}
		case syscall.SIGUSR2:
			if err := s.StartAPIServer(); err != nil {
				log.Print(err)
			}
		default:
			return
		}
	}
}
