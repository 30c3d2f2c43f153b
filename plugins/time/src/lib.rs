//! The `time` plugin: the current time, time-zone conversion and calendar arithmetic.
//!
//! Jiff does the work, with its bundled copy of the IANA time-zone database: a plugin has no file
//! system, so `/usr/share/zoneinfo` is out of reach. The current time comes from WASI's clock.

use jiff::civil::{Time, Weekday as JiffWeekday};
use jiff::fmt::temporal::{DateTimeParser, Pieces, PiecesOffset};
use jiff::tz::{Offset, TimeZone};
use jiff::{Span, Timestamp, Unit as JiffUnit, ZonedDateTime, ZonedDateTimeDifference};

moat_guest::generate!("time");

use exports::moat::time::tools::{Duration, Guest, TimeSpan, Unit, Weekday, ZonedTime};

struct TimePlugin;

impl Guest for TimePlugin {
    fn now(timezone: Option<String>) -> Result<ZonedTime, String> {
        let zone = match timezone {
            Some(name) => parse_zone(&name)?,
            None => TimeZone::UTC,
        };
        // Whole seconds, rounded down: what a clock shows.
        let now = Timestamp::from_second(Timestamp::now().as_second())
            .expect("the current time is within jiff's range");
        Ok(zoned_time(&now.to_zoned_datetime(zone)))
    }

    fn convert(time: String, timezone: String) -> Result<ZonedTime, String> {
        let zone = parse_zone(&timezone)?;
        Ok(zoned_time(&parse_time(&time, None)?.with_time_zone(zone)))
    }

    fn add(
        time: String,
        duration: Duration,
        timezone: Option<String>,
    ) -> Result<ZonedTime, String> {
        let zone = timezone.as_deref().map(parse_zone).transpose()?;
        let start = parse_time(&time, zone.as_ref())?;
        let span = span(&duration)?;
        let end = start
            .checked_add(span)
            .map_err(|e| format!("cannot add {span} to {start}: {e}"))?;
        Ok(zoned_time(&end))
    }

    fn difference(
        start: String,
        end: String,
        largest_unit: Option<Unit>,
        timezone: Option<String>,
    ) -> Result<TimeSpan, String> {
        let zone = timezone.as_deref().map(parse_zone).transpose()?;
        let start = parse_time(&start, zone.as_ref())?;
        // Calendar units need both ends in one zone: `start`'s.
        let end = parse_time(&end, zone.as_ref())?.with_time_zone(start.time_zone().clone());
        let largest = match largest_unit.unwrap_or(Unit::Days) {
            Unit::Years => JiffUnit::Year,
            Unit::Months => JiffUnit::Month,
            Unit::Weeks => JiffUnit::Week,
            Unit::Days => JiffUnit::Day,
            Unit::Hours => JiffUnit::Hour,
            Unit::Minutes => JiffUnit::Minute,
            Unit::Seconds => JiffUnit::Second,
        };
        // Rounds toward zero to whole seconds (jiff's default rounding mode for differences).
        let difference = ZonedDateTimeDifference::new(&end)
            .largest(largest)
            .smallest(JiffUnit::Second);
        let span = start.until(difference).map_err(|e| e.to_string())?;
        Ok(TimeSpan {
            years: span.get_years().into(),
            months: span.get_months().into(),
            weeks: span.get_weeks().into(),
            days: span.get_days().into(),
            hours: span.get_hours().into(),
            minutes: span.get_minutes(),
            seconds: span.get_seconds(),
            total_seconds: start.duration_until(&end).as_secs(),
            iso8601: span.to_string(),
        })
    }
}

/// A time zone from an IANA name (`Europe/Paris`, `UTC`), a fixed offset (`+05:30`) or a POSIX
/// TZ string.
fn parse_zone(name: &str) -> Result<TimeZone, String> {
    static PARSER: DateTimeParser = DateTimeParser::new();
    PARSER.parse_time_zone(name.trim()).map_err(|_| {
        format!(
            "unknown time zone {name:?}: use an IANA name such as `Europe/Paris` or \
             `America/New_York`, `UTC`, or an offset such as `+05:30`"
        )
    })
}

/// Reads a moment: RFC 3339 with an offset, optionally with a zone in brackets, or a local date and
/// time with a zone in brackets. With `zone`, a local date and time without either is read there,
/// and the moment is shown there.
fn parse_time(text: &str, zone: Option<&TimeZone>) -> Result<ZonedDateTime, String> {
    let text = text.trim();
    let unreadable = |e: jiff::Error| {
        format!(
            "cannot read the time {text:?} (expected a form such as `2024-03-10T12:00:00Z`): {e}"
        )
    };
    let pieces = Pieces::parse(text).map_err(unreadable)?;
    let moment = if pieces.time_zone_annotation().is_some() {
        text.parse::<ZonedDateTime>().map_err(unreadable)?
    } else if let Some(offset) = pieces.offset() {
        let zone = match offset {
            PiecesOffset::Zulu => TimeZone::UTC,
            numeric => TimeZone::fixed(numeric.to_numeric_offset()),
        };
        let timestamp: Timestamp = text.parse().map_err(unreadable)?;
        timestamp.to_zoned_datetime(zone)
    } else if let Some(zone) = zone {
        let local = pieces
            .date()
            .to_datetime(pieces.time().unwrap_or(Time::midnight()));
        // A local time skipped by a daylight-saving change moves forward; a repeated one takes
        // its first occurrence (the "compatible" choice of RFC 5545 and Temporal).
        zone.to_zoned_datetime(local).map_err(unreadable)?
    } else {
        return Err(format!(
            "the time {text:?} says neither its UTC offset nor its zone: add `Z` for UTC, an \
             offset such as `+01:00`, or a zone in brackets such as `[Europe/Paris]`"
        ));
    };
    Ok(match zone {
        Some(zone) => moment.with_time_zone(zone.clone()),
        None => moment,
    })
}

/// A jiff span from a duration record, refusing mixed signs (jiff would make every field negative).
fn span(duration: &Duration) -> Result<Span, String> {
    let Duration {
        years,
        months,
        weeks,
        days,
        hours,
        minutes,
        seconds,
    } = *duration;
    let fields = [years, months, weeks, days, hours, minutes, seconds];
    let values = fields.iter().flatten();
    if values.clone().any(|&n| n > 0) && values.clone().any(|&n| n < 0) {
        return Err(
            "the duration mixes positive and negative fields: give them all the same sign, \
             or add the two parts in two calls"
                .into(),
        );
    }
    let z = |field: Option<i64>| field.unwrap_or(0);
    let span = Span::new()
        .try_years(z(years))
        .and_then(|s| s.try_months(z(months)))
        .and_then(|s| s.try_weeks(z(weeks)))
        .and_then(|s| s.try_days(z(days)))
        .and_then(|s| s.try_hours(z(hours)))
        .and_then(|s| s.try_minutes(z(minutes)))
        .and_then(|s| s.try_seconds(z(seconds)))
        .map_err(|e| format!("the duration is too long: {e}"))?;
    Ok(span)
}

fn zoned_time(moment: &ZonedDateTime) -> ZonedTime {
    let zone = moment.time_zone();
    let info = zone.to_offset_info(moment.timestamp());
    ZonedTime {
        iso8601: moment
            .timestamp()
            .display_with_offset(moment.offset())
            .to_string(),
        timezone: zone
            .iana_name()
            .map_or_else(|| offset(moment.offset()), str::to_string),
        date: moment.date().to_string(),
        time: moment.time().to_string(),
        weekday: match moment.weekday() {
            JiffWeekday::Monday => Weekday::Monday,
            JiffWeekday::Tuesday => Weekday::Tuesday,
            JiffWeekday::Wednesday => Weekday::Wednesday,
            JiffWeekday::Thursday => Weekday::Thursday,
            JiffWeekday::Friday => Weekday::Friday,
            JiffWeekday::Saturday => Weekday::Saturday,
            JiffWeekday::Sunday => Weekday::Sunday,
        },
        utc_offset: offset(moment.offset()),
        abbreviation: info.abbreviation().to_string(),
        dst: info.dst().is_dst(),
        unix_seconds: moment.timestamp().as_second(),
    }
}

/// `+HH:MM`, or `+HH:MM:SS` for the odd historical offset (jiff's own display shortens `+05:00`
/// to `+05`).
fn offset(offset: Offset) -> String {
    let sign = if offset.seconds() < 0 { '-' } else { '+' };
    let total = offset.seconds().unsigned_abs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if seconds == 0 {
        format!("{sign}{hours:02}:{minutes:02}")
    } else {
        format!("{sign}{hours:02}:{minutes:02}:{seconds:02}")
    }
}

export!(TimePlugin);
