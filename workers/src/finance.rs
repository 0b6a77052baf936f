//! Pure business functions, free of models, tools and I/O (seed 000 section
//! 3.1): tested on their own, wrapped by tool adapters in [`crate::tools`].

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_business_formula() {
        assert_eq!(gross_margin(120.0, 75.0), Ok(0.375));
        assert_eq!(gross_margin(3.0, 1.0), Ok(0.6667));
        assert_eq!(gross_margin(100.0, 130.0), Ok(-0.3));
        assert_eq!(gross_margin(0.0, 10.0), Err(MarginError::NonPositiveRevenue));
        assert_eq!(gross_margin(-5.0, 1.0), Err(MarginError::NonPositiveRevenue));
    }
}
