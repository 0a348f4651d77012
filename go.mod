module github.com/zukhruf/lease

go 1.25

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/google/go-cmp v0.7.0
	go.uber.org/atomic v1.12.0
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)
