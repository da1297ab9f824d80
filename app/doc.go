// Package app is higgsd's configuration and wiring: Config (config.go: flags, HIGGS_* environment, a TOML
// file and defaults, validated at once), the wire providers that assemble the serving use case, the HTTP
// APIs and the model loader, and the runner Server (server.go: listen, load, serve, drain). The use cases
// live below it: app/serve (serving), app/verify (the higgs-verify harness), both on the one generation
// pipeline app/generation, and app/models (loading).
package app
