//! The market-data integration tests, one binary: the bar file formats
//! ([`formats`]) and the bundled sample data ([`samples`]).

mod fixtures;
mod formats;
mod samples;
