// Package fleet serves several local models behind one set of inbound ports: a request's model picks one,
// loaded on its first request and unloaded when idle past its keep-alive or when another needs the memory,
// every model with its own serve.Serve under one shared memory budget.
package fleet
