//! The market-data integration tests, one binary: the bar file formats
//! ([`formats`]), the bundled sample data ([`samples`]) and the exchange
//! calendar against it ([`calendar`]); bars brought by users ([`own_bars`]: offsets,
//! local time zones, symbols given on the asset).

mod calendar;
mod fixtures;
mod formats;
mod leakage;
mod own_bars;
mod samples;
mod user_columns;
