//! Log lines for people: what an interactive command's libraries log
//! (`tracing` events) printed as the command's own lines are, the message
//! alone (a plugin's after its name, as progress lines have it), with
//! `error:` or `warning:` in front where it is one. No time, no module path,
//! no `key=value` fields; `TLI_LOG` brings those back.

use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The people's format of [`super::LogStyle::People`].
pub struct ForPeople;

/// The event's message, and the plugin that said it (other fields are for logs).
#[derive(Default)]
struct Message {
    text: String,
    plugin: String,
}

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.text.push_str(value),
            "plugin" => self.plugin.push_str(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = match field.name() {
            "message" => write!(self.text, "{value:?}"),
            "plugin" => write!(self.plugin, "{value:?}"),
            _ => Ok(()),
        };
    }
}

impl<S, N> FormatEvent<S, N> for ForPeople
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut message = Message::default();
        event.record(&mut message);
        let prefix = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            _ => "",
        };
        if message.plugin.is_empty() {
            writeln!(writer, "{prefix}{}", message.text)
        } else {
            writeln!(writer, "{prefix}{}: {}", message.plugin, message.text)
        }
    }
}
