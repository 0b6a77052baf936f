//! Cost accounting: a model with a configured price stamps the dollar cost of
//! each call on its [`Usage`](flotilla_protocol::Usage). The cost is computed where the call is made
//! (the planner for its own model, a worker for its subagent's model), from
//! that process's config, so a worker on another host with another model is
//! still priced right; sums per task, subagent type and job then follow from
//! adding usages, as tokens do.

use std::sync::Arc;

use async_trait::async_trait;

use flotilla_agent::model::{ChatModel, ModelError, ModelIdentity, ModelRequest, ModelResponse};

pub use flotilla_config::Price;

/// Wraps `model` so each response's usage carries its cost; `None` leaves it unpriced.
pub fn priced(model: Arc<dyn ChatModel>, price: Option<Price>) -> Arc<dyn ChatModel> {
    match price {
        Some(price) => Arc::new(Priced { inner: model, price }),
        None => model,
    }
}

struct Priced {
    inner: Arc<dyn ChatModel>,
    price: Price,
}

#[async_trait]
impl ChatModel for Priced {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let mut response = self.inner.complete(request).await?;
        response.usage.cost_usd = self.price.cost(&response.usage);
        Ok(response)
    }

    fn identity(&self) -> ModelIdentity<'_> {
        self.inner.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::Usage;

    struct Fixed;
    #[async_trait]
    impl ChatModel for Fixed {
        async fn complete(&self, _: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
            Ok(ModelResponse {
                content: Some("hi".into()),
                tool_calls: vec![],
                usage: Usage { input_tokens: 2_000, output_tokens: 500, model_calls: 1, ..Usage::default() },
            })
        }
    }

    #[tokio::test]
    async fn each_call_carries_its_cost_and_costs_add_up() {
        let price = Price {
            input_per_mtok: 0.15,
            output_per_mtok: 0.60,
            cache_write_per_mtok: 0.15,
            cache_read_per_mtok: 0.15,
        };
        let m = priced(Arc::new(Fixed), Some(price));
        let req = ModelRequest::new(&[], &[]);
        let a = m.complete(req).await.unwrap().usage;
        // 2000 * 0.15 / 1e6 + 500 * 0.60 / 1e6 = 0.0003 + 0.0003
        assert!((a.cost_usd - 0.0006).abs() < 1e-12, "{}", a.cost_usd);
        let mut total = Usage::default();
        total += a;
        total += m.complete(req).await.unwrap().usage;
        assert!((total.cost_usd - 0.0012).abs() < 1e-12);
        assert_eq!(total.input_tokens, 4_000);

        let unpriced = priced(Arc::new(Fixed), None);
        assert_eq!(unpriced.complete(req).await.unwrap().usage.cost_usd, 0.0);
        let json = serde_json::to_string(&unpriced.complete(req).await.unwrap().usage).unwrap();
        assert!(!json.contains("cost_usd"), "no cost field without a price: {json}");
    }
}
