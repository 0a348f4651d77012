module github.com/zukhruf/lease/signalcancel

go 1.26.0

require (
	github.com/zukhruf/lease v0.0.0
	golang.org/x/tools v0.52.0
)

require (
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)

replace github.com/zukhruf/lease => ../
