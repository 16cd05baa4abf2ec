// Command conformance reproduces every golden vector of a vectors directory with the Go SDK.
//
//	go run ./cmd/conformance [-vectors DIR]
//
// The last line is "conformance: N/N vectors reproduced"; the exit status is 1 on any miss
// (an unknown file or section is a miss: "not covered").
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bernstein-journal/bernstein/producers/go/conformance"
)

func main() {
	dir := flag.String("vectors", defaultDir(), "directory of the *.json vector files")
	flag.Parse()
	r, err := conformance.Run(*dir, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		fmt.Println("conformance: 0/0 vectors reproduced")
		os.Exit(1)
	}
	fmt.Printf("conformance: %d/%d vectors reproduced\n", r.Passed(), len(r.Results))
	if r.Passed() != len(r.Results) || len(r.Results) == 0 {
		os.Exit(1)
	}
}

// defaultDir is the repository's schemas/vectors, found from the working directory upwards.
func defaultDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return "schemas/vectors"
	}
	for {
		candidate := filepath.Join(dir, "schemas", "vectors")
		if info, err := os.Stat(candidate); err == nil && info.IsDir() {
			if _, err := os.Stat(filepath.Join(candidate, "avro.json")); err == nil {
				return candidate
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "schemas/vectors"
		}
		dir = parent
	}
}
