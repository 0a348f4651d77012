module github.com/zukhruf/lease/issuers/mysqllease

go 1.25.0

replace github.com/zukhruf/lease => ../..

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/zukhruf/lease v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)
