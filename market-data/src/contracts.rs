//! Futures contract specifications: tick size, point value (currency per
//! 1.0 price move per contract), currency, trading session and exchange
//! calendar. Built-in for the common CME Group contracts; users add or
//! override contracts with a TOML file (`--contracts FILE` or
//! `TLI_CONTRACTS`):
//!
//! ```toml
//! [[contract]]
//! root = "FDAX"
//! name = "DAX futures"
//! exchange = "EUREX"
//! tick_size = 1.0
//! point_value = 25.0
//! currency = "EUR"
//! session = "01:15-22:00 CET"
//! reference_price = 18000.0   # optional: level for synthetic data
//! annual_volatility = 0.2     # optional: for synthetic data
//! # Optional calendar keys (see `calendar`; defaults come from the exchange):
//! timezone = "Europe/Berlin"  # IANA name
//! session_open = "01:15"      # local time; a close at or before the open
//! session_close = "22:00"     #   opens the evening before (Globex 17:00/16:00)
//! holidays = "none"           # "cme" or "none"
//! early_close = "none"        # local close on half days, or "none"
//! roll = "quarterly"          # "quarterly" (third-Friday expiry), "monthly" (NYMEX
//!                             #   crude-oil expiry) or "none"
//! expiry_months = "HMUZ"      # month codes of the listed contracts
//! roll_days_before_expiry = 8 # calendar days from roll to expiry
//! ```
//!
//! Figures for the built-ins are the exchange's published contract
//! specifications (CME Group product pages); their early closes are CME
//! Group's usual holiday-schedule times (equity index and FX 12:15 CT,
//! interest rates 12:00 CT, energy and metals 12:45 CT).

use super::DataError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractSpec {
    pub root: String,
    pub name: String,
    pub exchange: String,
    /// Minimum price increment, in price units.
    pub tick_size: f64,
    /// Currency per 1.0 move of the price, per contract.
    pub point_value: f64,
    pub currency: String,
    /// Trading hours, for people.
    pub session: String,
    /// A typical price level, used by the synthetic generator.
    #[serde(default)]
    pub reference_price: Option<f64>,
    /// A typical annualized volatility, used by the synthetic generator.
    #[serde(default)]
    pub annual_volatility: Option<f64>,
    /// IANA time zone of the exchange (`America/Chicago`); default from
    /// `exchange` (see [`crate::calendar`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Daily session open, local `HH:MM`; with a close at or before it the
    /// session opens the evening before its trading date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_open: Option<String>,
    /// Daily session close, local `HH:MM` (or `24:00`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_close: Option<String>,
    /// Close on half days, local `HH:MM`, or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_close: Option<String>,
    /// Holiday calendar: `cme` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holidays: Option<String>,
    /// Roll rule: `quarterly`, `monthly` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roll: Option<String>,
    /// Month codes of the contracts the roll rule walks through (`HMUZ`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_months: Option<String>,
    /// Calendar days from the roll date to the expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roll_days_before_expiry: Option<u32>,
}

impl ContractSpec {
    pub fn tick_value(&self) -> f64 {
        self.tick_size * self.point_value
    }

    /// The terms plugins receive with a dataset.
    pub fn terms(&self) -> tli_plugin_api::ContractTerms {
        tli_plugin_api::ContractTerms {
            root: self.root.as_str().into(),
            tick_size: self.tick_size,
            point_value: self.point_value,
            currency: self.currency.as_str().into(),
        }
    }

    fn check(&self) -> Result<(), String> {
        let root_ok = !self.root.is_empty()
            && self.root.len() <= 8
            && self
                .root
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if !root_ok {
            return Err(format!(
                "root {:?} must be 1-8 upper-case letters or digits",
                self.root
            ));
        }
        if !(self.tick_size.is_finite() && self.tick_size > 0.0) {
            return Err(format!(
                "{}: tick_size {} must be positive",
                self.root, self.tick_size
            ));
        }
        if !(self.point_value.is_finite() && self.point_value > 0.0) {
            return Err(format!(
                "{}: point_value {} must be positive",
                self.root, self.point_value
            ));
        }
        if self.currency.len() != 3 || !self.currency.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(format!(
                "{}: currency {:?} must be an ISO code like USD",
                self.root, self.currency
            ));
        }
        if let Some(p) = self.reference_price {
            if !(p.is_finite() && p > 0.0) {
                return Err(format!(
                    "{}: reference_price {p} must be positive",
                    self.root
                ));
            }
        }
        if let Some(v) = self.annual_volatility {
            if !(v.is_finite() && v > 0.0 && v < 5.0) {
                return Err(format!(
                    "{}: annual_volatility {v} must be in (0, 5)",
                    self.root
                ));
            }
        }
        crate::calendar::ExchangeCalendar::parse(self).map(|_| ())
    }
}

/// The calendar of a built-in (all CME Group: America/Chicago, Globex
/// 17:00-16:00, CME holidays): (early close, roll rule, expiry months, calendar
/// days from roll to expiry).
fn builtin_calendar(root: &str) -> (&'static str, &'static str, Option<(&'static str, u32)>) {
    match root {
        // Equity index: quarterly, third-Friday expiry, roll 8 days before (CME convention).
        "ES" | "MES" | "NQ" | "MNQ" | "RTY" | "YM" => ("12:15", "quarterly", Some(("HMUZ", 8))),
        // WTI: every month, NYMEX crude-oil expiry.
        "CL" => ("12:45", "monthly", Some(("FGHJKMNQUVXZ", 5))),
        // FX (expiry before the third Wednesday), Treasuries (first notice
        // day), natural gas and metals have expiry rules not modelled here.
        "6E" | "6J" => ("12:15", "none", None),
        "ZN" | "ZB" => ("12:00", "none", None),
        _ => ("12:45", "none", None),
    }
}

/// (root, name, exchange, tick size, point value, reference price, annual vol)
type Builtin = (&'static str, &'static str, &'static str, f64, f64, f64, f64);

const CME_EQUITY_SESSION: &str = "CME Globex Sun-Fri 17:00-16:00 CT";
const BUILTIN: &[Builtin] = &[
    ("ES", "E-mini S&P 500", "CME", 0.25, 50.0, 4500.0, 0.18),
    (
        "MES",
        "Micro E-mini S&P 500",
        "CME",
        0.25,
        5.0,
        4500.0,
        0.18,
    ),
    ("NQ", "E-mini Nasdaq-100", "CME", 0.25, 20.0, 15000.0, 0.22),
    (
        "MNQ",
        "Micro E-mini Nasdaq-100",
        "CME",
        0.25,
        2.0,
        15000.0,
        0.22,
    ),
    (
        "RTY",
        "E-mini Russell 2000",
        "CME",
        0.10,
        50.0,
        2000.0,
        0.22,
    ),
    ("YM", "E-mini Dow ($5)", "CBOT", 1.0, 5.0, 35000.0, 0.16),
    ("6E", "Euro FX", "CME", 0.00005, 125_000.0, 1.08, 0.07),
    (
        "6J",
        "Japanese Yen",
        "CME",
        0.000_000_5,
        12_500_000.0,
        0.0068,
        0.09,
    ),
    (
        "ZN",
        "10-Year T-Note",
        "CBOT",
        0.015625,
        1000.0,
        110.0,
        0.06,
    ),
    (
        "ZB",
        "U.S. Treasury Bond",
        "CBOT",
        0.03125,
        1000.0,
        120.0,
        0.12,
    ),
    ("CL", "Crude Oil (WTI)", "NYMEX", 0.01, 1000.0, 75.0, 0.35),
    (
        "NG",
        "Henry Hub Natural Gas",
        "NYMEX",
        0.001,
        10_000.0,
        3.0,
        0.55,
    ),
    ("GC", "Gold", "COMEX", 0.10, 100.0, 2000.0, 0.15),
    ("SI", "Silver", "COMEX", 0.005, 5000.0, 25.0, 0.28),
];

/// The contracts known to this process.
#[derive(Clone, Debug)]
pub struct ContractBook {
    specs: BTreeMap<String, ContractSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContractFile {
    contract: Vec<ContractSpec>,
}

impl ContractBook {
    pub fn builtin() -> Self {
        let specs = BUILTIN
            .iter()
            .map(|&(root, name, exchange, tick, point, price, vol)| {
                let session = if exchange == "CME" || exchange == "CBOT" {
                    CME_EQUITY_SESSION
                } else {
                    "CME Globex Sun-Fri 18:00-17:00 ET"
                };
                let (early_close, roll, roll_months) = builtin_calendar(root);
                let spec = ContractSpec {
                    root: root.into(),
                    name: name.into(),
                    exchange: exchange.into(),
                    tick_size: tick,
                    point_value: point,
                    currency: "USD".into(),
                    session: session.into(),
                    reference_price: Some(price),
                    annual_volatility: Some(vol),
                    timezone: Some("America/Chicago".into()),
                    session_open: Some("17:00".into()),
                    session_close: Some("16:00".into()),
                    early_close: Some(early_close.into()),
                    holidays: Some("cme".into()),
                    roll: Some(roll.into()),
                    expiry_months: roll_months.map(|(months, _)| months.into()),
                    roll_days_before_expiry: roll_months.map(|(_, days)| days),
                };
                (root.to_string(), spec)
            })
            .collect();
        Self { specs }
    }

    /// The built-ins plus (overridden by) the contracts in `user_file`, if any.
    pub fn load(user_file: Option<&Path>) -> Result<Self, DataError> {
        let mut book = Self::builtin();
        if let Some(path) = user_file {
            const MAX: u64 = 1 << 20;
            let mut text = String::new();
            std::io::Read::take(crate::files::open_data_file(path)?, MAX + 1)
                .read_to_string(&mut text)
                .map_err(|e| DataError::io(path, e))?;
            if text.len() as u64 > MAX {
                return Err(DataError::bad_file(
                    path,
                    "is larger than 1 MiB: not a contracts file",
                ));
            }
            let file: ContractFile = toml::from_str(&text).map_err(|e| {
                DataError::bad_file(path, format!("is not a valid contracts file: {e}"))
            })?;
            for spec in file.contract {
                spec.check().map_err(|e| DataError::bad_file(path, e))?;
                book.specs.insert(spec.root.clone(), spec);
            }
        }
        Ok(book)
    }

    pub fn roots(&self) -> Vec<&str> {
        self.specs.keys().map(String::as_str).collect()
    }

    pub fn specs(&self) -> impl Iterator<Item = &ContractSpec> {
        self.specs.values()
    }

    /// The spec for a symbol: a root (`ES`), a parent (`ES.FUT`) or an
    /// outright contract (`ESH4`, `ESZ24`).
    pub fn lookup(&self, symbol: &str) -> Result<&ContractSpec, DataError> {
        self.lookup_or_suggest(symbol, None)
    }

    /// [`lookup`](Self::lookup), with `first_remedy` offered in the refusal
    /// before adding a contracts file (a bar file's: name the symbol).
    pub fn lookup_or_suggest(
        &self,
        symbol: &str,
        first_remedy: Option<&str>,
    ) -> Result<&ContractSpec, DataError> {
        let candidates = root_candidates(symbol);
        candidates
            .iter()
            .find_map(|root| self.specs.get(root))
            .ok_or_else(|| {
                let root = candidates.first().cloned().unwrap_or_default();
                let roots = self.roots().join(", ");
                let contracts_file = "in a contracts file (--contracts FILE or TLI_CONTRACTS; \
                                      see docs/data.md)";
                DataError::Contract(match first_remedy {
                    None => format!(
                        "no contract specification for symbol {symbol:?} (root {root:?}); known \
                         roots: {roots}. Add it {contracts_file}"
                    ),
                    Some(remedy) => format!(
                        "no contract specification for symbol {symbol:?} (root {root:?}). \
                         {remedy}; known roots: {roots}. Otherwise add it {contracts_file}"
                    ),
                })
            })
    }

    /// The longest known root that `symbol` starts with (`ES_yahoo` → `ES`),
    /// for a suggestion.
    pub fn root_prefix_of(&self, symbol: &str) -> Option<&str> {
        let upper = symbol.trim().to_ascii_uppercase();
        self.specs
            .keys()
            .filter(|root| upper.starts_with(root.as_str()))
            .max_by_key(|root| root.len())
            .map(String::as_str)
    }
}

const MONTH_CODES: &str = "FGHJKMNQUVXZ";

/// Possible roots of a symbol, most specific first.
fn root_candidates(symbol: &str) -> Vec<String> {
    let s = symbol.trim().to_ascii_uppercase();
    let base = s.split('.').next().unwrap_or_default().to_string();
    let mut out = vec![base.clone()];
    // An outright: root + month code + 1-2 year digits.
    let digits = base
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if (1..=2).contains(&digits) && base.len() > digits + 1 {
        let month = base.as_bytes()[base.len() - digits - 1] as char;
        if MONTH_CODES.contains(month) {
            out.push(base[..base.len() - digits - 1].to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_outrights_and_roots_resolve() {
        let book = ContractBook::builtin();
        assert_eq!(book.lookup("ES.FUT").unwrap().point_value, 50.0);
        assert_eq!(book.lookup("ESH4").unwrap().root, "ES");
        assert_eq!(book.lookup("6EZ24").unwrap().root, "6E");
        assert_eq!(book.lookup("zn").unwrap().tick_value(), 15.625);
        for root in ["ES", "NQ", "6E", "ZN", "CL", "GC"] {
            assert!(book.lookup(root).is_ok(), "{root}");
        }
        let e = book.lookup("ZZ.FUT").unwrap_err().to_string();
        assert!(
            e.contains("no contract specification for symbol \"ZZ.FUT\""),
            "{e}"
        );
        assert!(e.contains("--contracts FILE"), "{e}");
    }

    #[test]
    fn a_user_file_adds_and_checks_contracts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("contracts.toml");
        std::fs::write(&path, "[[contract]]\nroot = \"FDAX\"\nname = \"DAX\"\nexchange = \"EUREX\"\ntick_size = 1.0\npoint_value = 25.0\ncurrency = \"EUR\"\nsession = \"01:15-22:00 CET\"\n").unwrap();
        let book = ContractBook::load(Some(&path)).unwrap();
        assert_eq!(book.lookup("FDAX.FUT").unwrap().currency, "EUR");
        std::fs::write(&path, "[[contract]]\nroot = \"X\"\nname = \"x\"\nexchange = \"x\"\ntick_size = 0.0\npoint_value = 1.0\ncurrency = \"USD\"\nsession = \"\"\n").unwrap();
        let e = ContractBook::load(Some(&path)).unwrap_err().to_string();
        assert!(e.contains("tick_size 0 must be positive"), "{e}");
        std::fs::write(&path, "[[contract]]\nroot = \"X\"\n").unwrap();
        assert!(ContractBook::load(Some(&path))
            .unwrap_err()
            .to_string()
            .contains("is not a valid contracts file"));
    }

    #[test]
    fn calendar_keys_load_and_are_checked() {
        for spec in ContractBook::builtin().specs() {
            spec.check().unwrap();
            crate::calendar::ExchangeCalendar::for_contract(spec).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("contracts.toml");
        let fdax = "[[contract]]\nroot = \"FDAX\"\nname = \"DAX\"\nexchange = \"EUREX\"\ntick_size = 1.0\npoint_value = 25.0\ncurrency = \"EUR\"\nsession = \"01:15-22:00 CET\"\n";
        std::fs::write(
            &path,
            format!("{fdax}timezone = \"Europe/Berlin\"\nsession_open = \"01:15\"\nsession_close = \"22:00\"\nholidays = \"none\"\nearly_close = \"none\"\nroll = \"quarterly\"\nexpiry_months = \"HMUZ\"\nroll_days_before_expiry = 8\n"),
        )
        .unwrap();
        let book = ContractBook::load(Some(&path)).unwrap();
        let cal =
            crate::calendar::ExchangeCalendar::for_contract(book.lookup("FDAX").unwrap()).unwrap();
        assert_eq!(cal.timezone(), "Europe/Berlin");
        for (extra, expected) in [
            (
                "roll = \"weekly\"\n",
                "FDAX: roll \"weekly\" is not a known roll rule",
            ),
            ("timezone = \"CET+1\"\n", "FDAX: timezone \"CET+1\""),
            (
                "session_close = \"22:00\"\n",
                "FDAX: session_open and session_close",
            ),
        ] {
            std::fs::write(&path, format!("{fdax}{extra}")).unwrap();
            let e = ContractBook::load(Some(&path)).unwrap_err().to_string();
            assert!(
                e.contains("contracts.toml: ") && e.contains(expected),
                "{e}"
            );
        }
        std::fs::write(&path, format!("{fdax}time_zone = \"UTC\"\n")).unwrap();
        let e = ContractBook::load(Some(&path)).unwrap_err().to_string();
        assert!(e.contains("unknown field `time_zone`"), "{e}");
    }
}
