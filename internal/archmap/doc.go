// Package archmap holds no code: its test keeps ARCHITECTURE.md's import graph true, comparing every line
// of the graph with the imports `go list` reports for the project's packages.
package archmap
