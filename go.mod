module github.com/zukhruf/lease

go 1.25

require go.uber.org/atomic v1.12.0
