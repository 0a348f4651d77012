module example.com/holder

go 1.26.0

require github.com/zukhruf/lease v0.0.0

require go.uber.org/atomic v1.12.0 // indirect

replace github.com/zukhruf/lease => ../..
