// Command k8s-apiserver builds the kube-apiserver binary of the k8slease
// tests into the user's cache folder if it is not there yet, and prints its
// path; make k8s-apiserver runs it. See package kubebin.
package main

import (
	"fmt"
	"log"
	"os"

	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest/kubebin"
)

func main() {
	log.SetFlags(0)
	path, err := kubebin.Ensure(func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(path)
}
