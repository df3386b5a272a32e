"""The HTTP edge: routes, input rules, error answers and the OpenAPI document, on Powertools'
resolver, over the service layer.
"""
