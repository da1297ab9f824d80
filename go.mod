module github.com/higgs-go/higgs

go 1.26

require (
	github.com/google/wire v0.7.0
	github.com/rs/zerolog v1.35.1
)

require (
	github.com/google/subcommands v1.2.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/mod v0.20.0 // indirect
	golang.org/x/sync v0.8.0 // indirect
	golang.org/x/sys v0.29.0 // indirect
	golang.org/x/tools v0.24.1 // indirect
)

tool github.com/google/wire/cmd/wire
