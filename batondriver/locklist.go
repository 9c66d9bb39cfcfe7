package batondriver

// LockListParams are the parameters of LockList.
type LockListParams struct {
	// Limit is the page size: 0 means 100, at most 1000.
	Limit int
	// Offset skips that many keys in use. The next page starts at Offset
	// plus the number of keys returned, which may be fewer than Limit.
	Offset int
}

// LockListResult is the result of LockList.
//
// Keys are in the byte order of their names. A page may hold fewer than
// Limit keys although more follow: a backend that prunes its index bounds
// the entries one call looks at. The listing is complete when Offset plus
// len(Keys) reaches Total.
//
// Total counts the keys in the index after the call: the keys in use, plus,
// on a backend that prunes lazily, idle keys past this page that no listing
// has pruned yet. It is exact on the memory backend, and on Redis once a
// listing has walked the whole index.
type LockListResult struct {
	Keys  []*LockInfo
	Total int
}

// LockInfo is one key in use as LockList reports it.
type LockInfo struct {
	Key string
	LockInspectResult
}
