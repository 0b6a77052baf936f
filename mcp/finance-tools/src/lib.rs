//! # finance-tools
//!
//! The example MCP server of Flotilla (docs/MCP.md):
//! pure business functions here, free of MCP, models and I/O, tested on their
//! own; [`server`] exposes them as MCP tools with rmcp's server macros; the
//! `finance-tools` binary serves them over stdio (default) or Streamable HTTP
//! (`--http 127.0.0.1:PORT`).
//!
//! The worker's native `calculate_margin` adapter uses [`gross_margin`] from
//! here too, so the business rule exists once.
#![deny(missing_docs)]

#[cfg(feature = "server")]
pub mod context;
#[cfg(feature = "server")]
pub mod server;

/// Why a margin cannot be computed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum MarginError {
    /// Revenue must be positive for a margin to mean anything.
    #[error("revenue must be greater than zero")]
    NonPositiveRevenue,
}

/// Gross margin `(revenue - cost) / revenue`, rounded to 4 decimals.
pub fn gross_margin(revenue: f64, cost: f64) -> Result<f64, MarginError> {
    if revenue <= 0.0 || revenue.is_nan() {
        return Err(MarginError::NonPositiveRevenue);
    }
    Ok(((revenue - cost) / revenue * 10_000.0).round() / 10_000.0)
}

/// Why integer arithmetic failed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ArithmeticError {
    /// The exact result does not fit in 64 bits.
    #[error("result overflows a 64-bit integer")]
    Overflow,
}

/// `a + b`, exactly.
pub fn add(a: i64, b: i64) -> Result<i64, ArithmeticError> {
    a.checked_add(b).ok_or(ArithmeticError::Overflow)
}

/// `a * b`, exactly.
pub fn multiply(a: i64, b: i64) -> Result<i64, ArithmeticError> {
    a.checked_mul(b).ok_or(ArithmeticError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_matches_the_business_formula() {
        assert_eq!(gross_margin(120.0, 75.0), Ok(0.375));
        assert_eq!(gross_margin(3.0, 1.0), Ok(0.6667));
        assert_eq!(gross_margin(100.0, 130.0), Ok(-0.3));
        assert_eq!(gross_margin(0.0, 10.0), Err(MarginError::NonPositiveRevenue));
        assert_eq!(gross_margin(-5.0, 1.0), Err(MarginError::NonPositiveRevenue));
        assert_eq!(gross_margin(f64::NAN, 1.0), Err(MarginError::NonPositiveRevenue));
    }

    #[test]
    fn arithmetic_is_exact_or_refused() {
        assert_eq!(add(37, 58), Ok(95));
        assert_eq!(multiply(95, 12), Ok(1140));
        assert_eq!(add(i64::MAX, 1), Err(ArithmeticError::Overflow));
        assert_eq!(multiply(i64::MAX, 2), Err(ArithmeticError::Overflow));
    }
}
