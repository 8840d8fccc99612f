//! The market-data integration tests, one binary: the bar file formats
//! ([`formats`]), the bundled sample data ([`samples`]) and the exchange
//! calendar against it ([`calendar`]).

mod calendar;
mod fixtures;
mod formats;
mod leakage;
mod samples;
