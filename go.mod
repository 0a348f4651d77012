module github.com/zukhruf/lease

go 1.24

require go.uber.org/atomic v1.12.0
