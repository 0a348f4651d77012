// Command signalcancel reports a cancel func of Signal.Context, or a release
// func of signal.Any, that is dropped or not called on every path:
//
//	go run github.com/zukhruf/lease/signalcancel/cmd/signalcancel ./...
//
// or, built with go build, as go vet's tool:
//
//	go vet -vettool=$(command -v signalcancel) ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/zukhruf/lease/signalcancel"
)

func main() { singlechecker.Main(signalcancel.Analyzer) }
