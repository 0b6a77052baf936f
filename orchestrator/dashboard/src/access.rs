//! What each [`Principal`] may see and do (docs/HTTP_API.md, "Auth"): the
//! one place that maps a token to tenants, so no handler decides it alone.
//!
//! - A tenant's token sees only its tenant: another tenant's job is answered
//!   404, exactly as a job that does not exist, so a token cannot probe
//!   which ids exist elsewhere.
//! - The admin token sees every tenant and acts for any: a job's own tenant
//!   for an action on a job, `?tenant=` (default `default`) for a submit.
//! - Without any token configured (a loopback listener, or
//!   `insecure_no_token` behind a proxy) reads see every tenant, as before,
//!   but writes act for the default tenant only: such a listener is reached
//!   by anyone on the host, who could already act for the default tenant with
//!   the CLI against a local NATS without credentials, but no further; other
//!   tenants need a token.

use axum::http::StatusCode;
use flotilla_protocol::ids::Tenant;

use super::Failure;
use super::guard::Principal;

impl Principal {
    /// Whether this principal sees jobs of `tenant`.
    pub fn sees(&self, tenant: &Tenant) -> bool {
        match self {
            Principal::Tenant(t) => t == tenant,
            Principal::Admin | Principal::Anonymous => true,
        }
    }

    /// Whose jobs a listing shows, given the `?tenant=` asked for (every
    /// tenant's when `None`).
    pub(crate) fn list_scope(&self, asked: Option<Tenant>) -> Result<Option<Tenant>, Failure> {
        match self {
            Principal::Tenant(t) => match asked {
                Some(a) if &a != t => Err(other_tenant(t)),
                _ => Ok(Some(t.clone())),
            },
            Principal::Admin | Principal::Anonymous => Ok(asked),
        }
    }

    /// The one tenant a tenant-wide request (a submit, the approvals list)
    /// acts for, given `?tenant=`.
    pub(crate) fn tenant_for(&self, asked: Option<Tenant>) -> Result<Tenant, Failure> {
        match self {
            Principal::Tenant(t) => self.list_scope(asked).map(|_| t.clone()),
            Principal::Admin => Ok(asked.unwrap_or_default()),
            Principal::Anonymous => {
                let tenant = asked.unwrap_or_default();
                self.may_act(&tenant)?;
                Ok(tenant)
            }
        }
    }

    /// Whether this principal may change a job of `tenant` (which it sees).
    pub(crate) fn may_act(&self, tenant: &Tenant) -> Result<(), Failure> {
        match self {
            Principal::Anonymous if tenant != &Tenant::default() => Err(Failure(
                StatusCode::FORBIDDEN,
                format!(
                    "acting for tenant {tenant} needs a token: configure [dashboard] token_env (admin) or \
                     [dashboard.tenants.{tenant}] token_env; without a token the dashboard acts only for the \
                     default tenant"
                ),
            )),
            p if !p.sees(tenant) => Err(Failure(StatusCode::NOT_FOUND, "no such job".into())),
            _ => Ok(()),
        }
    }

    /// Who decided, for the audit trail when the request names nobody.
    pub fn actor(&self) -> String {
        match self {
            Principal::Anonymous => "dashboard".into(),
            Principal::Admin => "dashboard admin token".into(),
            Principal::Tenant(t) => format!("dashboard token of tenant {t}"),
        }
    }
}

fn other_tenant(own: &Tenant) -> Failure {
    Failure(StatusCode::FORBIDDEN, format!("this token is bound to tenant {own}: leave out ?tenant= or use {own}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Tenant {
        Tenant::new(s).unwrap()
    }

    #[test]
    fn a_tenant_token_is_confined_to_its_tenant() {
        let acme = Principal::Tenant(t("acme"));
        assert!(acme.sees(&t("acme")) && !acme.sees(&t("globex")));
        assert_eq!(acme.list_scope(None).unwrap(), Some(t("acme")));
        assert_eq!(acme.list_scope(Some(t("globex"))).unwrap_err().0, StatusCode::FORBIDDEN);
        assert_eq!(acme.tenant_for(None).unwrap(), t("acme"));
        assert_eq!(acme.may_act(&t("globex")).unwrap_err().0, StatusCode::NOT_FOUND);
        assert!(acme.may_act(&t("acme")).is_ok());
    }

    #[test]
    fn the_admin_acts_for_any_tenant_and_no_token_for_the_default_one_only() {
        assert_eq!(Principal::Admin.tenant_for(Some(t("globex"))).unwrap(), t("globex"));
        assert_eq!(Principal::Admin.tenant_for(None).unwrap(), Tenant::default());
        assert_eq!(Principal::Admin.list_scope(None).unwrap(), None);
        assert_eq!(Principal::Anonymous.list_scope(None).unwrap(), None, "reads see every tenant");
        assert_eq!(Principal::Anonymous.tenant_for(None).unwrap(), Tenant::default());
        let e = Principal::Anonymous.tenant_for(Some(t("acme"))).unwrap_err();
        assert_eq!(e.0, StatusCode::FORBIDDEN);
        assert!(e.1.contains("[dashboard.tenants.acme] token_env"), "{}", e.1);
    }
}
