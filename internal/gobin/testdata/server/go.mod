// Module server pins example.com/tool for the examples of package gobin.
module example.com/server

go 1.22

require example.com/tool v1.2.3
