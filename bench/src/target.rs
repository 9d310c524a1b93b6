//! A target of the benchmark's issues and the ratio a run measured against it. A leaf: the
//! sections that judge their own targets (`depth`) and the report that prints them both use it.
use serde::Serialize;

/// One target (issues 6 and 23), with the ratio this run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TargetCheck {
    pub(crate) target: String,
    pub(crate) ratio: Option<f64>,
    pub(crate) at_least: Option<f64>,
    pub(crate) at_most: Option<f64>,
    /// `met`, `missed` or `not measured`.
    pub(crate) verdict: &'static str,
    pub(crate) detail: String,
}

impl TargetCheck {
    pub(crate) fn at_least(target: &str, ratio: Option<f64>, min: f64, detail: String) -> Self {
        TargetCheck {
            target: target.to_owned(),
            ratio,
            at_least: Some(min),
            at_most: None,
            verdict: match ratio {
                Some(r) if r >= min => "met",
                Some(_) => "missed",
                None => "not measured",
            },
            detail,
        }
    }

    pub(crate) fn at_most(target: &str, ratio: Option<f64>, max: f64, detail: String) -> Self {
        TargetCheck {
            target: target.to_owned(),
            ratio,
            at_least: None,
            at_most: Some(max),
            verdict: match ratio {
                Some(r) if r <= max => "met",
                Some(_) => "missed",
                None => "not measured",
            },
            detail,
        }
    }
}
