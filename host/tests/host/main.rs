//! The host crate's integration tests, one binary (one libtorch link): the
//! gRPC API in-process ([`api_server`]), the memory arbiter ([`arbiter`]),
//! atomic checkpoint directories ([`checkpoints`]) and the SQLite job store
//! ([`store`]), typed plugin configs over the API ([`typed_configs`]). Fixtures shared with the benchmarks are in `tli_testkit`.

mod api_1_1;
mod api_server;
mod arbiter;
mod checkpoints;
mod store;
mod typed_configs;
