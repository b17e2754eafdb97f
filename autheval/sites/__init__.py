"""Several sites that keep their records: each site exports sufficient statistics (autheval.sites.export),
signed (autheval.sites.signing); a hub pools them (autheval.sites.pool)."""
