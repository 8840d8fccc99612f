//! The front-contract roll of a parent-symbology DBN file: the active
//! contract of each day, the [`Roll`]s between contracts and the ratio
//! back-adjustment of the bars before them (rules in the [module docs](super)).

use super::reader::RawBars;
use crate::timefmt::{self, NANOS_PER_DAY};
use crate::{list_excerpt, BarInterval, BarTable, DataError, Roll};
use dbn::{Metadata, SType, TsSymbolMap};
use std::collections::HashMap;
use std::path::Path;

/// One contract of a parent-symbology file: its records (indices into
/// [`RawBars`], in time order) split by UTC day.
struct Contract {
    id: u32,
    symbol: String,
    records: Vec<usize>,
    /// (day, volume of the day, range in `records`), days ascending.
    days: Vec<(i64, u128, std::ops::Range<usize>)>,
}

impl Contract {
    fn day(&self, day: i64) -> Option<&(i64, u128, std::ops::Range<usize>)> {
        self.days
            .binary_search_by_key(&day, |d| d.0)
            .ok()
            .map(|i| &self.days[i])
    }
}

/// Rolls a parent-symbology file to one front-contract series (rules in the
/// [module docs](super)).
pub(super) fn roll_to_front(
    path: &Path,
    metadata: &Metadata,
    bars: &RawBars,
    symbols: &TsSymbolMap,
    interval: BarInterval,
) -> Result<BarTable, DataError> {
    let mut index: HashMap<u32, usize> = HashMap::new();
    let mut contracts: Vec<Contract> = Vec::new();
    for (record, &id) in bars.id.iter().enumerate() {
        let k = *index.entry(id).or_insert_with(|| {
            contracts.push(Contract {
                id,
                symbol: symbols
                    .get_for_ts(bars.ts[record] as u64, id)
                    .cloned()
                    .unwrap_or_else(|| format!("instrument {id}")),
                records: Vec::new(),
                days: Vec::new(),
            });
            contracts.len() - 1
        });
        contracts[k].records.push(record);
    }
    let names = || list_excerpt(contracts.iter().map(|c| c.symbol.as_str()), ", ");
    if metadata.stype_in != Some(SType::Parent) {
        return Err(DataError::bad_file(
            path,
            format!(
                "holds {} instruments ({}) but its symbology is {}, not parent; \
                 only parent symbols such as ES.FUT are rolled into one series",
                contracts.len(),
                names(),
                metadata
                    .stype_in
                    .map_or("mixed".to_string(), |s| s.to_string())
            ),
        ));
    }
    let parent = match metadata.symbols.as_slice() {
        [one] if !one.is_empty() => one.clone(),
        other => {
            return Err(DataError::bad_file(
                path,
                format!(
                    "parent symbology needs exactly one parent symbol; the file has {} ({})",
                    other.len(),
                    list_excerpt(other.iter().map(String::as_str), ", ")
                ),
            ))
        }
    };
    contracts.retain(|c| !c.symbol.contains('-'));
    if contracts.is_empty() {
        return Err(DataError::bad_file(
            path,
            "holds only calendar spreads (symbols with '-')",
        ));
    }
    contracts.sort_by_key(|c| c.id);

    for contract in &mut contracts {
        for pair in contract.records.windows(2) {
            if bars.ts[pair[1]] <= bars.ts[pair[0]] {
                return Err(DataError::bad_row(
                    path,
                    pair[1] + 1,
                    format!(
                        "{}: timestamp {} is not after the contract's previous bar (record {})",
                        contract.symbol,
                        timefmt::format(bars.ts[pair[1]]),
                        pair[0] + 1
                    ),
                ));
            }
        }
        for &record in &contract.records {
            check_bar(path, bars, record, &contract.symbol)?;
        }
        let mut start = 0;
        while start < contract.records.len() {
            let day = bars.ts[contract.records[start]].div_euclid(NANOS_PER_DAY);
            let mut end = start;
            let mut volume: u128 = 0;
            while end < contract.records.len()
                && bars.ts[contract.records[end]].div_euclid(NANOS_PER_DAY) == day
            {
                volume += u128::from(bars.volume[contract.records[end]]);
                end += 1;
            }
            contract.days.push((day, volume, start..end));
            start = end;
        }
    }

    let mut days: Vec<i64> = contracts
        .iter()
        .flat_map(|c| c.days.iter().map(|d| d.0))
        .collect();
    days.sort_unstable();
    days.dedup();
    // The contracts trading on each day, with their volume: each day looks at
    // those only, not at every contract (a file can hold thousands).
    let mut by_day: HashMap<i64, Vec<(usize, u128)>> = HashMap::new();
    for (c, contract) in contracts.iter().enumerate() {
        for &(day, volume, _) in &contract.days {
            by_day.entry(day).or_default().push((c, volume));
        }
    }

    let mut table = BarTable::new(&parent, interval);
    let mut retired = vec![false; contracts.len()];
    let mut active: Option<usize> = None;
    // The contract rolled away from, until the first bar of the new one is taken.
    let mut pending_from: Option<usize> = None;
    // (position in the table of the first bar after the roll, roll)
    let mut rolls: Vec<(usize, Roll)> = Vec::new();
    for (k, &day) in days.iter().enumerate() {
        let volume_day = if k == 0 { day } else { days[k - 1] };
        let best = by_day
            .get(&volume_day)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&(c, _)| !retired[c])
            .max_by(|a, b| {
                a.1.cmp(&b.1)
                    .then_with(|| (Some(a.0) == active).cmp(&(Some(b.0) == active)))
                    .then_with(|| contracts[b.0].id.cmp(&contracts[a.0].id))
            })
            .map(|(c, _)| c);
        match (active, best) {
            (None, Some(c)) => active = Some(c),
            (Some(a), Some(c)) if a != c => {
                retired[a] = true;
                pending_from = pending_from.or(Some(a));
                active = Some(c);
            }
            _ => {}
        }
        let Some(a) = active else { continue };
        let Some((_, _, range)) = contracts[a].day(day) else {
            continue;
        };
        for &record in &contracts[a].records[range.clone()] {
            if let Some(from) = pending_from.take() {
                let ratio = roll_ratio(bars, &contracts[from], &contracts[a], bars.ts[record]);
                rolls.push((
                    table.len(),
                    Roll {
                        ts: bars.ts[record],
                        from: contracts[from].symbol.clone(),
                        to: contracts[a].symbol.clone(),
                        ratio,
                    },
                ));
            }
            table.push(
                bars.ts[record],
                bars.open[record],
                bars.high[record],
                bars.low[record],
                bars.close[record],
                bars.volume[record],
            );
        }
    }

    // Ratio back-adjustment: walk backwards, multiplying by each roll's ratio
    // once past it.
    let mut factor = 1.0;
    let mut next_roll = rolls.len();
    for i in (0..table.len()).rev() {
        while next_roll > 0 && rolls[next_roll - 1].0 > i {
            factor *= rolls[next_roll - 1].1.ratio;
            next_roll -= 1;
        }
        if factor != 1.0 {
            table.open[i] *= factor;
            table.high[i] *= factor;
            table.low[i] *= factor;
            table.close[i] *= factor;
        }
    }
    table.rolls = rolls.into_iter().map(|(_, roll)| roll).collect();
    table.validate(path)?;
    Ok(table)
}

/// new close / old close at the last timestamp before `roll_ts` at which both
/// contracts have a bar; 1.0 if there is none.
fn roll_ratio(bars: &RawBars, old: &Contract, new: &Contract, roll_ts: i64) -> f64 {
    let new_ts: Vec<i64> = new.records.iter().map(|&r| bars.ts[r]).collect();
    for &old_record in old.records.iter().rev() {
        let ts = bars.ts[old_record];
        if ts >= roll_ts {
            continue;
        }
        if let Ok(j) = new_ts.binary_search(&ts) {
            return bars.close[new.records[j]] / bars.close[old_record];
        }
    }
    1.0
}

/// The checks of [`BarTable::validate`] on one record, so that errors name
/// the record (the rolled table's rows are not the file's records).
fn check_bar(path: &Path, bars: &RawBars, record: usize, symbol: &str) -> Result<(), DataError> {
    let row = record + 1;
    let when = timefmt::format(bars.ts[record]);
    let [o, h, l, c] = [&bars.open, &bars.high, &bars.low, &bars.close].map(|v| v[record]);
    for (name, value) in [("open", o), ("high", h), ("low", l), ("close", c)] {
        if value <= 0.0 {
            return Err(DataError::bad_row(
                path,
                row,
                format!(
                    "{symbol}: {name} is {value} at {when}; prices must be finite and positive"
                ),
            ));
        }
    }
    if h < l {
        return Err(DataError::bad_row(
            path,
            row,
            format!("{symbol}: high {h} is below low {l} at {when}"),
        ));
    }
    if o < l || o > h || c < l || c > h {
        return Err(DataError::bad_row(
            path,
            row,
            format!("{symbol}: open {o} or close {c} lies outside low {l} .. high {h} at {when}"),
        ));
    }
    Ok(())
}
