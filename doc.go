// Package baton is background job processing for Go whose centre is locking
// and concurrency control: a job can say "one of me per user at a time", "at
// most 10 of us per customer", "drop me if my twin is running", and Baton
// keeps that promise across every process sharing the backend.
//
// The job system is being built on the lock layer, which is ready: see
// package batonlock for fair, fenced, heartbeat-kept locks and semaphores on
// Redis (standalone, Sentinel, Cluster) and in memory.
package baton
