package ports

// Token is a vocabulary id.
type Token = int32

// NoToken marks "no token" where a Token argument is optional (for example Distribution.Sample's exclude).
const NoToken Token = -1
