//! `flotilla queues`: the task queue of each subagent type, read from the
//! tasks stream's consumers and the dead-letter stream (not the job API).

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::QueueStats;
use flotilla_protocol::ids::Tenant;

use super::connect;
use super::out::{self, out};
use super::table;

/// `flotilla queues` takes no arguments of its own; its help text is the
/// `Queues` command's doc comment in main.rs.
#[derive(ClapArgs, Debug)]
pub struct Args {}

/// Runs the command; `json`: print `{"queues": [...]}`.
pub async fn run(settings: &Settings, tenant: &Tenant, _args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let queues = api.queues().await?;
    if json {
        out::json(&serde_json::json!({ "queues": queues }))?;
    } else {
        out!("{}", table(&queues, flotilla_protocol::now()))?;
    }
    Ok(0)
}

/// The human table: one line per subagent type.
pub fn table(queues: &[QueueStats], now: time::OffsetDateTime) -> String {
    if queues.is_empty() {
        return "no task queues yet (a worker declares its type's queue when it starts)\n".into();
    }
    let mut t = table::new(&["TYPE", "PENDING", "IN FLIGHT", "REDELIVERED", "DEAD", "OLDEST WAITING"]);
    table::align_right(&mut t, &[1, 2, 3, 4, 5]);
    for q in queues {
        t.add_row([
            q.subagent_type.to_string(),
            q.pending.to_string(),
            q.in_flight.to_string(),
            q.redelivered.to_string(),
            q.dead_letters.to_string(),
            q.oldest_wait(now).map(age).unwrap_or_else(|| "-".into()),
        ]);
    }
    table::render(t, "")
}

/// `42s`, `5m07s`, `3h02m`, `2d04h`: the two largest units.
fn age(d: time::Duration) -> String {
    let s = d.whole_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(ty: &str, pending: u64, oldest: Option<i64>) -> QueueStats {
        let at = time::OffsetDateTime::UNIX_EPOCH;
        serde_json::from_value(serde_json::json!({
            "v": 1, "subagent_type": ty, "pending": pending, "in_flight": 2, "redelivered": 1, "dead_letters": 4,
            "oldest_waiting_at": oldest.map(|s| (at + time::Duration::seconds(s)).format(&time::format_description::well_known::Rfc3339).unwrap()),
            "at": "1970-01-01T00:00:00Z",
        }))
        .expect("queue stats")
    }

    #[test]
    fn one_line_per_type_with_the_oldest_wait_as_an_age() {
        let now = time::OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(100);
        let text = table(&[stats("finance", 3, Some(58)), stats("a-much-longer-type-name", 0, None)], now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("TYPE") && lines[0].ends_with("OLDEST WAITING"), "{text}");
        let end = lines[0].len();
        assert!(lines[1].starts_with("finance") && lines[1].ends_with("42s") && lines[1].len() == end, "{text}");
        assert!(lines[2].ends_with('-') && lines[2].len() == end, "nothing waits: {text}");
        let dead_end = lines[0].find("DEAD").unwrap() + "DEAD".len();
        assert_eq!(lines[1][..dead_end].trim_end().chars().last(), Some('4'), "{text}");
        assert!(table(&[], now).starts_with("no task queues"));
    }

    #[test]
    fn ages_show_their_two_largest_units() {
        let age = |s| age(time::Duration::seconds(s));
        assert_eq!(
            [age(0), age(59), age(61), age(3 * 3600 + 125), age(2 * 86_400 + 5 * 3600)],
            ["0s", "59s", "1m01s", "3h02m", "2d05h"]
        );
    }
}
