module github.com/annals-go/annals

go 1.26

require (
	github.com/sony/gobreaker/v2 v2.4.0
	google.golang.org/protobuf v1.36.12
)

require github.com/mattn/go-sqlite3 v1.14.53
