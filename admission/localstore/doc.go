// Package localstore holds the admission stores of one node: Memory, which decides in this
// process and keeps nothing across a restart, and Store, the durable store built on it, which
// commits every change to an SQLite database in a folder before it answers (with a ring of
// changes in a shared mapping, so that a buy need not wait for its commit). docs/admission.md
// ("Durable local store") has the design; package admissiontest is the contract both pass.
package localstore
