//! Bar fixtures shared by the tests and the `dbn_read` benchmark (which
//! includes this file by path).

use tli_data::{timefmt, BarInterval, BarTable};

/// A deterministic random walk of one-minute bars on a 0.25 tick grid
/// (xorshift64, no RNG crate).
pub struct MinuteWalk {
    pub symbol: &'static str,
    /// The first bar's open time (`timefmt::parse` text).
    pub start: &'static str,
    /// The xorshift64 state to start from (not zero).
    pub seed: u64,
    /// The first bar's open.
    pub price: f64,
    /// Closes never go below this.
    pub floor: f64,
    /// Volumes are 1 ..= this.
    pub max_volume: u64,
}

impl MinuteWalk {
    /// `n` bars, each opening at the previous close.
    pub fn bars(&self, n: usize) -> BarTable {
        let mut t = BarTable::new(self.symbol, BarInterval::Minute);
        let start = timefmt::parse(self.start).expect("fixture start time");
        let minute = 60 * timefmt::NANOS_PER_SECOND;
        let mut state = self.seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut price = self.price;
        for i in 0..n {
            let open = price;
            let close = (open + ((next() % 9) as f64 - 4.0) * 0.25).max(self.floor);
            let high = open.max(close) + (next() % 4) as f64 * 0.25;
            let low = open.min(close) - (next() % 4) as f64 * 0.25;
            t.push(
                start + i as i64 * minute,
                open,
                high,
                low,
                close,
                1 + next() % self.max_volume,
            );
            price = close;
        }
        t
    }
}
