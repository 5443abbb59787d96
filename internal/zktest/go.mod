module github.com/simba-go/simba/internal/zktest

go 1.26.0

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/simba-go/simba v0.0.0-00010101000000-000000000000
)
