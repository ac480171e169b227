from flask import Blueprint

blueprint = Blueprint("proxy", __name__)
