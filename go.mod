module github.com/batonhq/baton

go 1.26.8

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
